"""Translations of run feeds into other clients' stream formats (pure; decisions D10).

:mod:`gateway.dialects.ai_sdk` turns AG-UI run events into Vercel AI SDK UI message
stream chunks; :mod:`gateway.dialects.ai_sdk_parts` is the UI message those chunks
build, as a function of the run fold; :mod:`gateway.dialects.ai_sdk_wire` is their SSE
framing, the ``E:O:K`` chunk ids and the in-band restart announcement.
"""
