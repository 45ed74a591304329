"""AG-UI run feeds: event checks, the run fold and its prelude."""
