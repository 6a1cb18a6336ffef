//! Statistical inference on top of the compiled model (fits, tests, limits, toys) — see the CPU inference issue.
