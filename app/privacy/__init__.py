"""Privacy: zCDP accounting, OpenDP noise, private selection, and the mechanisms.

Pure library code: it may import `app.pgm`, never web or database code.

- `accounting` — ρ-zCDP costs of the Gaussian, Laplace and exponential mechanisms (in
  floats, and exactly as rationals of the floats used) and the conversion of ρ to
  (ε, δ) (tight Canonne–Kamath–Steinke bound and the loose one).
- `noise` — discrete Gaussian / discrete Laplace noise on integer counts, from OpenDP.
- `selection` — the exponential mechanism (Gumbel report-noisy-max), from OpenDP.
- `mechanisms` — AIM and MWEM+PGM as resumable select/measure loops over `app.pgm`.
"""
