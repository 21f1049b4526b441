"""Models: short compositions of stages."""
from .dau1997 import Dau1997
from .glasberg2002 import Glasberg2002
from .king2019 import King2019
from .moore2016 import Moore2016
from .osses2021 import Osses2021
from .paulick2024 import Paulick2024

MODELS = {"dau1997": Dau1997, "glasberg2002": Glasberg2002, "king2019": King2019,
          "moore2016": Moore2016, "osses2021": Osses2021, "paulick2024": Paulick2024}

__all__ = ["Dau1997", "Glasberg2002", "King2019", "Moore2016", "Osses2021", "Paulick2024",
           "MODELS"]
