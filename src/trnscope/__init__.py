"""trnscope: profile PyTorch for AWS Trainium on an emulated NeuronCore."""

__version__ = "0.1.0"
