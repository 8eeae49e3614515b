"""The engine: walks nodes through the state machine, journal first, and decides halts."""
