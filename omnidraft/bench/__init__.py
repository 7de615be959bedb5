"""`omnidraft bench SUITE`: the product's standing benchmarks, each a suite of rows (the product
through ``Session`` and the honest alternatives) run interleaved on prompt sets, stamped and kept
in a history (omnidraft/measure/)."""
