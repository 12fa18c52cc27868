"""A package only so that pytest names its modules ``framework.test_<module>``: tests/pipeline/ holds a
``test_model_flops.py`` too (pipeline/model_flops.py and framework/model_flops.py), and pytest's default
import mode needs test modules outside packages to have unique names."""
