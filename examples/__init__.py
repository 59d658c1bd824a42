"""Runnable jobs over the local services (``make demo``); not part of the installed package."""
