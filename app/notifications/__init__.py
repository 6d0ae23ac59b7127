"""Notifications: what people must know, by email and webhook.

An audited change that a person must hear of becomes a row of the outbox (``notifications``)
and one delivery per destination (``notification_deliveries``), in the change's own
transaction (``emit.py``); the worker delivers them.
"""
