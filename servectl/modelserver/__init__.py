"""A TF-Serving-compatible model server: real SavedModels with TensorFlow, TF Serving's APIs."""
