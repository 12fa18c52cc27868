"""The TensorBoard side: starting and probing a server, and the `mftb doctor` checks."""
