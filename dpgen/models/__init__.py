from dpgen.models.generators import (GENERATORS, count_parameters, generator_from_config, make_generator,
                                     released_generator, sharpen)

__all__ = ["GENERATORS", "count_parameters", "generator_from_config", "make_generator", "released_generator", "sharpen"]
