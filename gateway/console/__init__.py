"""The console page and the JavaScript client, as package data (no Python code).

Served by the gateway at ``/console/`` (``importlib.resources.files("gateway.console")``):
``index.html``, ``console.css``, ``console.js`` and ``folds.js`` (the page) and
``gateway-client.js`` with its types ``gateway-client.d.ts`` (the client, also for
dashboards of your own).  See docs/console.md.
"""
