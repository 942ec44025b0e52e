"""The HTTP gateway: Parley for browsers and AG-UI frontends. Client side (a Temporal
client; never imported by workflows).

- ``app``: the FastAPI application wired together, and the approval page at ``/``;
- ``rest``, ``agui``: its routes (``/v1``; ``POST /agui``); ``streams``: turns and
  conversations as AG-UI Server-Sent Events; ``errors``: the one error shape;
  ``deps``: the caller's user and checked session ids; ``guard``: the token and a
  body-size limit checked before any body is read; ``replay``: a retried request's run;
  ``links``: signed one-time approval links; ``link_pages``: their pages' no-referrer
  and no-store headers;
- ``access``: bearer tokens mapped to user ids (the user always comes from the token);
- ``feeds``: one ``wait_for_events`` subscription per conversation, shared by every
  stream that follows it;
- ``health``: ``/healthz`` and ``/readyz`` for probes, and the answers of a gateway
  not yet connected to Temporal;
- ``server``: running the app with uvicorn on the caller's event loop, and draining it
  on SIGTERM.
"""
