"""Parley: LLM-agent conversations as durable Temporal workflows."""
