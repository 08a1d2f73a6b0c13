"""Drivers that run a whole analysis from its inputs: plan → runs → table → fit → document."""
