"""relayer-stub: an OpenZeppelin Relayer v1.x compatible executor for dev and tests."""
