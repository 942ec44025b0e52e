"""The HTTP gateway: Parley for browsers and AG-UI frontends. Client side (a Temporal
client; never imported by workflows).

- ``app``: the FastAPI application (REST + Server-Sent Events + ``POST /agui``) and the
  approval page it serves at ``/``;
- ``access``: bearer tokens mapped to user ids (the user always comes from the token);
- ``feeds``: one ``wait_for_events`` subscription per conversation, shared by every
  stream that follows it;
- ``server``: running the app with uvicorn on the caller's event loop.
"""
