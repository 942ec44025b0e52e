"""What Parley's processes tell operators without leaking: ``logs`` (text or JSON
lines), ``tracing`` (OpenTelemetry, off unless asked) and ``redaction`` (secrets kept
out of history, logs and spans). Worker, gateway and CLI side."""
