"""Signed ``transaction_update`` notifications, delivered in the background with retries."""
