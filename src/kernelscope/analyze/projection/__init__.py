"""Projection onto other hardware: the fitted projection model, its fit, several GPUs, the what-if study and the accelerator a run needs."""
