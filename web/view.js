// The live view of tsdfd: the map list, the chosen map's mesh kept current
// block by block (GET /api/mesh since the version last seen), its sensors'
// poses and paths, and a raycast from the 3D camera or a sensor. Every
// request is spaced by the daemon's view_interval_ms and backs off when
// the daemon says so (429, 503 with Retry-After), so that an open tab
// never slows integration. The format of every reply is documented in
// docs/OPERATIONS.md, "Live view".
'use strict';

const statusEl = document.getElementById('status');
const errorsEl = document.getElementById('errors');
let errorCount = 0;

// Errors go into the page as well as the console, so that a headless test
// (and an operator) can read them from the document.
function reportError(what) {
  errorCount++;
  statusEl.dataset.errors = String(errorCount);
  statusEl.classList.add('bad');
  const li = document.createElement('li');
  li.textContent = String(what);
  errorsEl.appendChild(li);
}
window.addEventListener('error', (e) => reportError(e.message || e));
const consoleError = console.error.bind(console);
console.error = (...args) => { reportError(args.join(' ')); consoleError(...args); };
window.addEventListener('unhandledrejection', (e) => reportError(e.reason));

// Options from the address's hash: map=NAME, eye=x,y,z, target=x,y,z, ray=off
// (a fixed camera instead of one fitted to the first mesh).
const hash = new URLSearchParams(location.hash.slice(1));
function vec3Param(name) {
  const v = (hash.get(name) || '').split(',').map(Number);
  return v.length === 3 && v.every(Number.isFinite) ? new THREE.Vector3(v[0], v[1], v[2]) : null;
}

// One id per open page: the daemon limits each page on its own.
const client = Math.random().toString(36).slice(2, 12);
let intervalMs = 250;
let chosenMap = hash.get('map') || '';
// ray=off: the live raycast starts unchecked.
if (hash.get('ray') === 'off') document.getElementById('ray-on').checked = false;

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// GET with the page's client id. Returns the Response when it is 200, or
// null after waiting as long as the daemon asked (Retry-After) on 429 and
// 503; other statuses are errors.
async function get(path, params) {
  const q = new URLSearchParams(params || {});
  q.set('client', client);
  const r = await fetch(path + '?' + q.toString(), { cache: 'no-store' });
  if (r.ok) return r;
  if (r.status === 429 || r.status === 503) {
    const s = Number(r.headers.get('Retry-After')) || 1;
    await sleep(Math.min(s, 10) * 1000);
    return null;
  }
  throw new Error(path + ': ' + r.status + ' ' + (await r.text()).trim());
}

// ---- the 3D view ----------------------------------------------------------

const container = document.getElementById('view');
const renderer = new THREE.WebGLRenderer({ antialias: true, preserveDrawingBuffer: true });
renderer.setPixelRatio(window.devicePixelRatio);
renderer.setClearColor(0x202028);
container.appendChild(renderer.domElement);
const scene = new THREE.Scene();
// The daemon's world has z up (the demo room's floor is z = 0).
const camera = new THREE.PerspectiveCamera(50, 1, 0.02, 200);
camera.up.set(0, 0, 1);
camera.position.set(3, -3, 3);
const controls = new THREE.OrbitControls(camera, renderer.domElement);
scene.add(new THREE.HemisphereLight(0xffffff, 0x404050, 0.8));
const sun = new THREE.DirectionalLight(0xffffff, 0.6);
sun.position.set(2, -3, 5);
scene.add(sun);
const meshGroup = new THREE.Group();
const sensorGroup = new THREE.Group();
scene.add(meshGroup, sensorGroup);
const plain = new THREE.MeshLambertMaterial({ color: 0xb8c4d8, side: THREE.DoubleSide });
const colored = new THREE.MeshLambertMaterial({ vertexColors: THREE.VertexColors,
  side: THREE.DoubleSide });

function resize() {
  const w = container.clientWidth, h = container.clientHeight;
  renderer.setSize(w, h);
  camera.aspect = w / h;
  camera.updateProjectionMatrix();
}
window.addEventListener('resize', () => { resize(); redraw(); });
resize();

let fitted = false;
const fixedEye = vec3Param('eye'), fixedTarget = vec3Param('target');
if (fixedEye) {
  camera.position.copy(fixedEye);
  controls.target.copy(fixedTarget || new THREE.Vector3(0, 0, 0));
  fitted = true;
}
controls.update();

function fitCamera() {
  const box = new THREE.Box3().setFromObject(meshGroup);
  if (box.isEmpty()) return;
  const c = box.getCenter(new THREE.Vector3());
  const r = box.getSize(new THREE.Vector3()).length() * 0.5;
  controls.target.copy(c);
  camera.position.set(c.x + r * 1.2, c.y - r * 1.2, c.z + r * 1.0);
  controls.update();
  fitted = true;
}

// Frames are drawn only when something changed: a software-rendered
// WebGL (a headless browser, a server without a GPU) would otherwise spend
// a core redrawing the same picture sixty times a second.
let dirty = true;
const redraw = () => { dirty = true; };
controls.addEventListener('change', redraw);
(function animate() {
  requestAnimationFrame(animate);
  if (!dirty) return;
  dirty = false;
  renderer.render(scene, camera);
})();

// ---- the mesh, block by block ----------------------------------------------

const blocks = new Map(); // "x,y,z" -> THREE.Mesh
let meshVersion = 0, meshUpdates = 0;

function dropBlock(key) {
  const m = blocks.get(key);
  if (!m) return;
  meshGroup.remove(m);
  m.geometry.dispose();
  blocks.delete(key);
}

function clearBlocks() {
  for (const key of Array.from(blocks.keys())) dropBlock(key);
}

const pad4 = (n) => (n + 3) & ~3;

// Applies one reply of /api/mesh (view_mesh.h): removed blocks, then each
// part replaces its block's geometry (a part without triangles drops it).
function applyMesh(buf) {
  const dv = new DataView(buf);
  const magic = String.fromCharCode(dv.getUint8(0), dv.getUint8(1), dv.getUint8(2), dv.getUint8(3));
  if (magic !== 'TSMB' || dv.getUint32(4, true) !== 1) throw new Error('not a TSMB mesh');
  const version = Number(dv.getBigUint64(8, true));
  const flags = dv.getUint32(24, true);
  const nblocks = dv.getUint32(28, true), nremoved = dv.getUint32(32, true);
  const hasColors = (flags & 2) !== 0, index32 = (flags & 4) !== 0;
  if (flags & 1) clearBlocks();
  let p = 40;
  for (let i = 0; i < nremoved; i++, p += 12)
    dropBlock(dv.getInt32(p, true) + ',' + dv.getInt32(p + 4, true) + ',' + dv.getInt32(p + 8, true));
  for (let b = 0; b < nblocks; b++) {
    const key = dv.getInt32(p, true) + ',' + dv.getInt32(p + 4, true) + ',' + dv.getInt32(p + 8, true);
    const nv = dv.getUint32(p + 12, true), nt = dv.getUint32(p + 16, true);
    p += 20;
    const pos = new Float32Array(buf, p, 3 * nv);
    p += 12 * nv;
    const nrm = new Int8Array(buf, p, 3 * nv);
    p += pad4(3 * nv);
    let col = null;
    if (hasColors) {
      col = new Uint8Array(buf, p, 3 * nv);
      p += pad4(3 * nv);
    }
    const idx = index32 ? new Uint32Array(buf, p, 3 * nt) : new Uint16Array(buf, p, 3 * nt);
    p += pad4(3 * nt * (index32 ? 4 : 2));
    dropBlock(key);
    if (nt === 0) continue;
    const g = new THREE.BufferGeometry();
    g.setAttribute('position', new THREE.BufferAttribute(pos, 3));
    g.setAttribute('normal', new THREE.BufferAttribute(nrm, 3, true));
    if (col) g.setAttribute('color', new THREE.BufferAttribute(col, 3, true));
    g.setIndex(new THREE.BufferAttribute(idx, 1));
    const m = new THREE.Mesh(g, col ? colored : plain);
    blocks.set(key, m);
    meshGroup.add(m);
  }
  meshVersion = version;
  meshUpdates++;
  let triangles = 0;
  for (const m of blocks.values()) triangles += m.geometry.index.count / 3;
  statusEl.dataset.blocks = String(blocks.size);
  statusEl.dataset.triangles = String(triangles);
  statusEl.dataset.version = String(meshVersion);
  statusEl.dataset.meshUpdates = String(meshUpdates);
  // The blocks that hold surface: fewer than the map list's, which counts
  // every block the volume holds, observed empty space included.
  statusEl.textContent = chosenMap + ': ' + blocks.size + ' blocks with surface, ' + triangles +
    ' triangles, version ' + meshVersion;
  if (!fitted) fitCamera();
  redraw();
}

async function meshLoop() {
  let shownMap = '';
  for (;;) {
    try {
      if (!chosenMap) { await sleep(intervalMs); continue; }
      if (chosenMap !== shownMap) { clearBlocks(); meshVersion = 0; shownMap = chosenMap; }
      const r = await get('api/mesh', { map: chosenMap, since: meshVersion });
      if (r && shownMap === chosenMap) applyMesh(await r.arrayBuffer());
    } catch (e) {
      reportError(e.message || e);
      await sleep(2000);
    }
    await sleep(Math.max(intervalMs, 500));
  }
}

// ---- the map list and the sensors ------------------------------------------

const fmt = (v, d) => (v === null || v === undefined ? '–' : Number(v).toFixed(d));

function showMaps(state) {
  intervalMs = Math.max(state.view ? state.view.interval_ms : 250, 100);
  document.getElementById('daemon').textContent = 'tsdfd ' + state.daemon.version + ', ' +
    state.daemon.backend + ' backend, up ' + fmt(state.daemon.uptime_s, 0) + ' s, ' +
    state.daemon.frames_integrated + ' frames integrated';
  statusEl.dataset.maps = String(state.maps.length);
  // Unless the URL named one: the map with the most blocks, not the first
  // (an empty "default" beside the map the robots stream into).
  if (!chosenMap && state.maps.length)
    chosenMap = state.maps.reduce((a, b) => (b.blocks > a.blocks ? b : a)).name;
  const body = document.querySelector('#maps tbody');
  body.textContent = '';
  for (const m of state.maps) {
    const tr = document.createElement('tr');
    tr.dataset.map = m.name;
    if (m.name === chosenMap) tr.className = 'chosen';
    const cells = [m.name, m.blocks, fmt(m.load_factor, 3), fmt(m.memory_bytes / 1048576, 1),
      fmt(m.frames_per_s, 1), m.queue_depth + '/' + m.queue_capacity, m.sensors.length];
    for (const c of cells) {
      const td = document.createElement('td');
      td.textContent = String(c);
      tr.appendChild(td);
    }
    tr.title = m.frames_integrated + ' frames, version ' + m.version + ', sensors: ' +
      m.sensors.join(', ');
    tr.addEventListener('click', () => { chosenMap = m.name; });
    body.appendChild(tr);
  }
}

// A camera's frustum as lines, 0.15 m deep, from its pose and intrinsics.
function frustum(s) {
  const T = s.T_world_cam, d = 0.15;
  const w = s.width || 640, h = s.height || 480, K = s.K;
  const corner = (u, v) => {
    const x = (u - K[2]) / K[0] * d, y = (v - K[3]) / K[1] * d, z = d;
    return [T[0] * x + T[1] * y + T[2] * z + T[3], T[4] * x + T[5] * y + T[6] * z + T[7],
      T[8] * x + T[9] * y + T[10] * z + T[11]];
  };
  const o = [T[3], T[7], T[11]];
  const c = [corner(0, 0), corner(w, 0), corner(w, h), corner(0, h)];
  const pts = [];
  for (let i = 0; i < 4; i++) pts.push(...o, ...c[i], ...c[i], ...c[(i + 1) % 4]);
  const g = new THREE.BufferGeometry();
  g.setAttribute('position', new THREE.Float32BufferAttribute(pts, 3));
  return new THREE.LineSegments(g, new THREE.LineBasicMaterial({ color: 0xffcc44 }));
}

function showSensors(map) {
  document.getElementById('map-name').textContent = map.name;
  for (const o of sensorGroup.children.slice()) {
    sensorGroup.remove(o);
    o.geometry.dispose();
  }
  const list = document.getElementById('sensors');
  list.textContent = '';
  const from = document.getElementById('ray-from');
  const keep = from.value;
  while (from.options.length > 1) from.remove(1);
  for (const s of map.sensors) {
    const li = document.createElement('li');
    li.textContent = s.name + ': ' + s.frames + ' frames' +
      (s.age_s !== undefined ? ', last ' + fmt(s.age_s, 1) + ' s ago' : '');
    list.appendChild(li);
    const opt = document.createElement('option');
    opt.value = s.name;
    opt.textContent = 'following ' + s.name;
    from.appendChild(opt);
    if (s.trajectory.length > 1) {
      const g = new THREE.BufferGeometry();
      g.setAttribute('position', new THREE.Float32BufferAttribute(s.trajectory.flat(), 3));
      sensorGroup.add(new THREE.Line(g, new THREE.LineBasicMaterial({ color: 0x66ddff })));
    }
    if (s.T_world_cam) sensorGroup.add(frustum(s));
  }
  redraw();
  from.value = Array.from(from.options).some((o) => o.value === keep) ? keep : '';
}

async function stateLoop() {
  for (;;) {
    try {
      const r = await get('api/maps');
      if (r) showMaps(await r.json());
      if (chosenMap) {
        const m = await get('api/map', { map: chosenMap });
        if (m) showSensors(await m.json());
      }
    } catch (e) {
      reportError(e.message || e);
      await sleep(2000);
    }
    await sleep(Math.max(intervalMs, 1000));
  }
}

// ---- the raycast ----------------------------------------------------------------

// The 3D camera as a T_world_cam (x right, y down, z forward: three.js
// looks down -z with y up) and its intrinsics for a 320 x 240 image.
function cameraParams() {
  camera.updateMatrixWorld();
  const e = camera.matrixWorld.elements; // column-major
  const T = [e[0], -e[4], -e[8], e[12], e[1], -e[5], -e[9], e[13], e[2], -e[6], -e[10], e[14],
    0, 0, 0, 1];
  const fy = 120 / Math.tan((camera.fov * Math.PI) / 360);
  return { pose: T.map((v) => v.toFixed(6)).join(','), fx: fy, fy: fy, cx: 159.5, cy: 119.5,
    max: 20 };
}

async function raycastLoop() {
  const img = document.getElementById('raycast');
  let lastUrl = null;
  // The first mesh goes first: a raycast would hold the map's share of
  // the worker while the page has nothing to show yet.
  while (meshUpdates === 0) await sleep(intervalMs);
  for (;;) {
    try {
      if (chosenMap && document.getElementById('ray-on').checked) {
        const from = document.getElementById('ray-from').value;
        const params = from ? { sensor: from } : cameraParams();
        Object.assign(params, { map: chosenMap, width: 320, height: 240,
          mode: document.getElementById('ray-mode').value });
        const r = await get('api/raycast', params);
        if (r) {
          const url = URL.createObjectURL(await r.blob());
          img.src = url;
          if (lastUrl) URL.revokeObjectURL(lastUrl);
          lastUrl = url;
        }
      }
    } catch (e) {
      reportError(e.message || e);
      await sleep(2000);
    }
    await sleep(Math.max(intervalMs, 1500));
  }
}

statusEl.textContent = 'waiting for the first mesh';
stateLoop();
meshLoop();
raycastLoop();
