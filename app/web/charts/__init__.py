"""Server-rendered SVG charts: pure functions from figures to accessible markup."""
