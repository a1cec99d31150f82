"""Agents written only against rlpar's public API, as a user would write their own."""
