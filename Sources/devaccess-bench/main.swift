print("devaccess-bench: not yet")
