"""Ray wiring: trainer ranks and engine replicas as actors in placement groups.

Ray is imported only here, so the rest of lego_rl runs without a cluster.
"""
