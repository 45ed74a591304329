"""AG-UI run feeds as the Vercel AI SDK UI message stream (pure; docs/contract.md D10).

- :mod:`~gateway.dialects.ai_sdk.translator`: AG-UI run events as UI message stream
  chunks, one event at a time;
- :mod:`~gateway.dialects.ai_sdk.parts`: the parts of a UI message and the chunks that
  build or change them;
- :mod:`~gateway.dialects.ai_sdk.projection`: the UI message of a run as a function of
  its fold, kept up to date per event;
- :mod:`~gateway.dialects.ai_sdk.framing`: the chunks' SSE framing, the ``E:O:K`` chunk
  ids and the in-band restart chunk.
"""
