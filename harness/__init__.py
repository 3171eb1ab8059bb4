"""The suite's harness: benchmark cases, GPU timing and the regression gate."""
