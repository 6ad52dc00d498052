"""Orchestration of single runs: the run store (store), training and sampling (train), attacks (attack)."""
