"""The timer that walks every transaction from pending to a final status."""
