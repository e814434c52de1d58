"""Golden models of the Spillway family (SPEC section 1), one per Component of ``hdl/spillway/``."""
