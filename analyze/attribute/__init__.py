"""Every GPU op given one phase: the phase rules (phases.py), the attribution, interval unions."""
