"""Replay of Fastrack traces through a hardware model, after a protocol transform."""
