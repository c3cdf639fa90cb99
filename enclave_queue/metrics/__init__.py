"""Prometheus metrics of the control process, served at ``/metrics`` (api/routes/metrics.py):
instruments.py (the registry and the instruments the controller updates as things happen, low
in the layers) and collector.py (each queue's numbers and the broker's state, read at scrape
time, high in them). This package imports neither, so importing one never imports the other."""
