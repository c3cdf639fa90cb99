"""The controller: the control plane's own loops, which turn declared queues into broker objects
and keep them that way.

mapping.py (pure spec -> JetStream config), accounts.py (queue accounts: their claims pushed to
the broker, passwords and storage reservations), reconciler.py (the loop that converges each queue); beside them mover.py
(the dead-letter mover), errornotes.py (the error notes' stream and its bounds), naks.py (the
nak counter), sampler.py (depth samples) and callout.py (operator mode's auth callout). It never
imports queues/ (what is asked for by hand), nor the reverse: what both need is in state/ or
broker/.
"""
