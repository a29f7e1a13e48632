"""The checks and what runs them: ``checks`` (one module per behaviour), ``strategies`` (what they draw),
``budgets`` (the error model and each operation's budget), ``harness`` (calling a candidate and judging its
answer) and ``runner`` (the pytest plugin, the CLI, profiles, expectations)."""
