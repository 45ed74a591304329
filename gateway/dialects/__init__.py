"""Other agent dialects, in and out of run feeds (pure; docs/contract.md D10).

Everything here is sans-I/O: validation against the seed schemas packaged in
``gateway/schemas``, the translations, and the folds late joiners need.

Out of run feeds, to other clients' stream formats:

- :mod:`gateway.dialects.ai_sdk`: AG-UI run events as Vercel AI SDK UI message stream
  chunks (``translator``); ``parts`` is the UI message those chunks build, as a function
  of the run fold; ``projection`` keeps it per event; ``framing`` is their SSE framing,
  the ``E:O:K`` chunk ids and the in-band restart announcement.

Into run feeds, from other producers:

- :mod:`gateway.dialects.sparktide`: SparkTide AgentEvent 1.0 validation, the sequence
  rule, the body check; :mod:`gateway.dialects.sparktide_agui`: the per-run translation
  state and the table-driven translation of each event to AG-UI events.
- :mod:`gateway.dialects.a2ui`: A2UI v0.9 validation, the surface registry check, the
  mapping to AG-UI activities and the extraction for clients that render A2UI directly;
  :mod:`gateway.dialects.a2ui_surface`: the surface fold and its compaction.
"""
