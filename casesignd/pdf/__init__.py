"""Reading, checking and rewriting PDF files, before any key is used: the parser and the
file's frame, bounded stream decoding, the active-content rules, the deep inspection
(:mod:`.inspect`), the one clean rewrite (:mod:`.normalize`) and pages compared as pictures
(:mod:`.render`). It signs nothing and reads no configuration file.
"""
