"""Send, get, list and cancel: the OZ Relayer transaction API."""
