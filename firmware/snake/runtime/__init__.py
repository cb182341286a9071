"""The asyncio runtime and its ports: imports snake's core, which never
imports it (snake/__init__.py has the rule)."""
