"""Dialects translated into run feeds (decisions D10): SparkTide AgentEvent 1.0 and A2UI v0.9.

Everything here is pure (sans-I/O): validation against the seed schemas packaged in
``gateway/schemas``, the translations to AG-UI, and the folds late joiners need.  The
HTTP routes, the producer API and the inbox call into these modules.

- :mod:`gateway.dialects.sparktide`: validation, the sequence rule, the body check.
- :mod:`gateway.dialects.sparktide_agui`: the per-run translation state and the
  table-driven translation of each SparkTide event to AG-UI events.
- :mod:`gateway.dialects.a2ui`: validation, the surface registry check, the mapping to
  AG-UI activities and the extraction for clients that render A2UI directly.
- :mod:`gateway.dialects.a2ui_surface`: the surface fold and its compaction.
"""
