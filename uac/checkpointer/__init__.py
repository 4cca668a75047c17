"""The checkpointer: the fold, typed state, windows, and the state stores."""
