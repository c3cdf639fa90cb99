"""What the HTTP API (api/) and the console (console/) share, so that neither imports the other:
the rules every path part follows (paths.py), console sessions (sessions.py) and their cookies
(cookies.py), the proxies whose forwarded headers are believed (proxies.py), and the control
plane the app serves (plane.py)."""
