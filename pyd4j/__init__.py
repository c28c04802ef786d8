"""pyd4j: memory and performance toolkit for Deeplearning4j / ND4J, driven from Python.

Importing pyd4j starts nothing: the JVM starts on `pyd4j.jvm.start()` (or the first call that
needs it), and nothing is downloaded or built at import time.
"""

__version__ = "0.1.0"
