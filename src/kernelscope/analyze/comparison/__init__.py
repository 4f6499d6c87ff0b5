"""Runs against each other: the comparison's tables, the one definition of each metric and the one verdict rule on a change, the regression gate."""
