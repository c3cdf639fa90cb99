"""The controller: turns declared queues into broker objects and keeps them that way.

mapping.py (pure spec -> JetStream config), accounts.py (queue accounts, the spare pool and the
broker configuration), reconciler.py (the loop that converges each queue); beside them
deadletters.py (the dead-letter mover), naks.py (the nak counter) and sampler.py (depth history).
"""
