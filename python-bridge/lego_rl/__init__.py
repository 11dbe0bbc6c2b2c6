"""lego_rl: the Python half of lego-rl (receiver, model, engine, trainer)."""
