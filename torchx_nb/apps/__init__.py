"""Small programs that built-in components run inside the job (TorchX's ``torchx.apps.utils``)."""
