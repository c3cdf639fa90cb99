"""The desk: where a queue's apps ask the control plane about their own queue (endpoint.py) and
leave notes of puts it must act on later, start deadlines (deadlines.py). A peer of api/: both
answer requests from outside, with what service.py and queues/ hold."""
