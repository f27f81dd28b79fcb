"""Synthetic scenes with exact depth, for the tests: a plane facing the
camera and a sphere at the world origin, rendered with numpy."""

import math

import numpy as np

SPHERE_RADIUS_M = 0.3
WIDTH, HEIGHT = 160, 120
FX = FY = 150.0
CX, CY = (WIDTH - 1) / 2.0, (HEIGHT - 1) / 2.0
K = np.array([[FX, 0.0, CX], [0.0, FY, CY], [0.0, 0.0, 1.0]])


def look_at(eye, target, up=(0.0, 0.0, 1.0)):
    """T_world_cam of a camera at eye looking at target (x right, y down,
    z forward)."""
    eye = np.asarray(eye, dtype=np.float64)
    forward = np.asarray(target, dtype=np.float64) - eye
    forward /= np.linalg.norm(forward)
    right = np.cross(forward, up)
    right /= np.linalg.norm(right)
    down = np.cross(forward, right)
    T = np.eye(4)
    T[:3, 0], T[:3, 1], T[:3, 2], T[:3, 3] = right, down, forward, eye
    return T


def render_sphere(T_world_cam, width=WIDTH, height=HEIGHT, fx=FX, fy=FY, cx=CX, cy=CY):
    """Exact z-depth in metres (0 = no hit) of the sphere from T_world_cam."""
    u, v = np.meshgrid(np.arange(width), np.arange(height))
    rays = np.stack([(u - cx) / fx, (v - cy) / fy, np.ones(u.shape)], -1)
    R, t = T_world_cam[:3, :3], T_world_cam[:3, 3]
    d = rays @ R.T
    # |t + s d|^2 = r^2 with s the camera z-depth (d's camera z is 1).
    a = np.sum(d * d, -1)
    b = d @ t
    c = t @ t - SPHERE_RADIUS_M**2
    disc = b * b - a * c
    s = np.where(disc >= 0, (-b - np.sqrt(np.maximum(disc, 0))) / a, 0.0)
    return np.where(s > 0, s, 0.0)


def orbit_poses(rings=(-60, -20, 20, 60), per_ring=8, distance_m=1.0):
    """Views on rings of these elevations (degrees) around the sphere."""
    for i, elev_deg in enumerate(rings):
        for k in range(per_ring):
            az = 2 * math.pi * (k + 0.5 * (i % 2)) / per_ring
            el = math.radians(elev_deg)
            eye = distance_m * np.array(
                [math.cos(el) * math.cos(az), math.cos(el) * math.sin(az), math.sin(el)])
            yield look_at(eye, (0.0, 0.0, 0.0))


def plane_depth(distance_m, width=64, height=48):
    """A wall at z = distance_m in front of the camera, as float32 metres."""
    return np.full((height, width), distance_m, dtype=np.float32)


PLANE_K = (50.0, 50.0, 31.5, 23.5)  # fx, fy, cx, cy of plane_depth's 64 x 48 camera
