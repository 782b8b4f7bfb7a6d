"""Speed checks: the wall time of perfmodel's searches, the PaSE DP and sweeps."""
