from dpgen.models.generators import GENERATORS, count_parameters, generator_from_config, make_generator

__all__ = ["GENERATORS", "count_parameters", "generator_from_config", "make_generator"]
