"""TensorFlow's rank side (tf-allreduce, tf-ps): the model zoo (models), the epoch loops
(epochs) and the shared rank helpers (common)."""
