// pch_anchor.cpp — gives the precompiled-header target one translation unit.
