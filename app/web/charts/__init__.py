"""Server-rendered SVG charts: no JavaScript, readable without colour, with table fallbacks."""
