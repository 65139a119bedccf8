"""servectl: serve TensorFlow models with one authority over replicas and traffic."""

__version__ = "0.1.0"
