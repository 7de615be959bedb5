"""Decoding (omnidraft.decode): the decode loop that yields one ``Round`` per verification, the
target side (verification, sampling, modes), and the generation front door."""
