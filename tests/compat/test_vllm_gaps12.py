"""Round 12b (issue 26 item 12): tests that kill mutants the suite let through."""
