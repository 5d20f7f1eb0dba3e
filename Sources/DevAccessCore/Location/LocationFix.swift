// The one C function the model needs: no trigonometry in the standard library.
import func Glibc.cos

/// One position report of one receiver, as gpsd's TPV gives it, or as devaccess serves it
/// at a granted accuracy (`accuracy` below `.exact`).
public struct LocationFix: Sendable, Hashable {
    /// The receiver's path in gpsd (`/dev/ttyACM0`); nil when gpsd did not say.
    public var device: String?
    /// gpsd's TPV `mode`: 0 not seen yet, 1 no fix, 2 2D, 3 3D.
    public var mode: Int
    /// The receiver's time of the fix (ISO 8601, UTC, as gpsd sends it).
    public var time: String?
    /// Degrees, WGS84.
    public var latitude: Double?
    public var longitude: Double?
    /// Metres above mean sea level.
    public var altitude: Double?
    /// Metres per second over ground; degrees from true north; metres per second upwards.
    public var speed: Double?
    public var track: Double?
    public var climb: Double?
    /// Estimated horizontal and vertical error, metres (gpsd's `eph`, `epv`).
    public var horizontalError: Double?
    public var verticalError: Double?
    /// How precise these figures are allowed to be.
    public var accuracy: LocationAccuracy

    public init(device: String? = nil, mode: Int, time: String? = nil, latitude: Double? = nil,
                longitude: Double? = nil, altitude: Double? = nil, speed: Double? = nil, track: Double? = nil,
                climb: Double? = nil, horizontalError: Double? = nil, verticalError: Double? = nil,
                accuracy: LocationAccuracy = .exact) {
        self.device = device
        self.mode = mode
        self.time = time
        self.latitude = latitude
        self.longitude = longitude
        self.altitude = altitude
        self.speed = speed
        self.track = track
        self.climb = climb
        self.horizontalError = horizontalError
        self.verticalError = verticalError
        self.accuracy = accuracy
    }

    /// A 2D or 3D fix with coordinates.
    public var hasPosition: Bool { mode >= 2 && latitude != nil && longitude != nil }
}

/// Coarsens fixes to an accuracy level, for one receiver.
///
/// Coordinates go to the centre of a grid cell of the level's size. The centre depends only
/// on the cell, so a program that reads a million times and averages gets the centre, no
/// closer. A position that wanders across a cell edge (receiver noise) would flip between
/// two cells, and the share of reads in each would say where the edge lies; so the cell
/// served last is kept until the position is half a cell beyond it, or twice the
/// receiver's own error estimate (gpsd's eph) when that is more, up to a whole cell, and
/// has stayed there for `fixesToMove` fixes. Speed, track and
/// climb, which let a program dead-reckon within a cell, and the altitude are withheld below
/// exact: a rounded altitude flips between two values with receiver noise, and the share of
/// each says the true altitude (and, with a terrain model, a contour line in the cell).
public struct LocationBlur: Sendable {
    private var served: [LocationAccuracy: LocationGrid.Cell] = [:]
    /// Fixes in a row that fell outside the served cell (and its margin), per level, and
    /// the time of the last one counted: a fix served many times (every reader, every POLL)
    /// counts once, so asking often cannot hurry a move.
    private var outside: [LocationAccuracy: Int] = [:]
    private var counted: [LocationAccuracy: String] = [:]
    /// A move to a neighbouring cell is served once this many fixes in a row (about 10 s
    /// at 1 Hz) put the position there: a receiver that wanders across an edge and back
    /// (multipath, indoors) stays in its cell, whatever its error estimate claims. A jump
    /// of two cells or more is served at once.
    public static let fixesToMove = 10

    public init() {}

    public mutating func serve(_ fix: LocationFix, at level: LocationAccuracy) -> LocationFix {
        guard level < fix.accuracy, let cellMeters = level.cellMeters else { return fix }
        var out = LocationFix(device: fix.device, mode: fix.mode, time: fix.time, accuracy: level)
        guard fix.hasPosition, let latitude = fix.latitude, let longitude = fix.longitude else {
            out.latitude = nil
            out.longitude = nil
            return out
        }
        let grid = LocationGrid(cellMeters: cellMeters)
        // The margin grows with the receiver's own error estimate: a receiver wandering ±40 m
        // must not flip between 100 m cells in proportions that place the edge.
        let margin = min(1, max(0.5, 2 * (fix.horizontalError ?? 0) / cellMeters))
        let found = grid.cell(latitude: latitude, longitude: longitude, keeping: served[level], margin: margin)
        var cell = found
        if let previous = served[level], found != previous, !grid.isFar(found, from: previous) {
            let fresh = fix.time == nil || fix.time != counted[level]
            counted[level] = fix.time
            let count = outside[level, default: 0] + (fresh ? 1 : 0)
            if count < Self.fixesToMove {
                outside[level] = count
                cell = previous
            } else {
                outside[level] = 0
            }
        } else {
            outside[level] = 0
        }
        served[level] = cell
        let centre = grid.centre(of: cell)
        out.latitude = centre.latitude
        out.longitude = centre.longitude
        out.horizontalError = cellMeters
        // Without an altitude a 3D fix says no more than a 2D one.
        out.mode = min(fix.mode, 2)
        return out
    }
}

/// A grid over the globe with cells about `cellMeters` on a side: rows of equal latitude
/// height, each divided into a whole number of columns so that cells near the poles are
/// not slivers and no column straddles the antimeridian.
///
/// The levels' grids are nested: every level subdivides the country grid (300 km) into
/// whole numbers of rows and columns (a country cell is 30 × 30 city cells, a city cell
/// 10 × 10 neighborhood cells, ...). So the answer at a coarser level says nothing the
/// finer one does not: with grids drawn apart, a column edge of the city grid would cut a
/// neighborhood cell, and asking both would place the machine in part of it.
public struct LocationGrid: Sendable, Hashable {
    public struct Cell: Sendable, Hashable {
        public var row: Int
        public var column: Int
    }

    /// A degree of latitude, and of longitude at the equator, in metres (WGS84, rounded).
    static let metresPerDegree = 111_320.0
    /// The coarsest grid, which every other subdivides.
    static let baseMeters = 300_000.0

    public var cellMeters: Double
    /// Rows and columns of this grid per row and column of the base grid.
    let subdivision: Int

    public init(cellMeters: Double) {
        self.cellMeters = cellMeters
        subdivision = max(1, Int((Self.baseMeters / cellMeters).rounded()))
    }

    static let baseRowHeight = baseMeters / metresPerDegree
    static let baseRowCount = Int((180 / baseRowHeight).rounded(.up))

    var rowHeight: Double { Self.baseRowHeight / Double(subdivision) }
    var rowCount: Int { Self.baseRowCount * subdivision }

    /// The base grid's columns in the base row holding `row`, times the subdivision.
    func columnCount(row: Int) -> Int {
        let baseRow = row / subdivision
        let latitude = min(90, -90 + (Double(baseRow) + 0.5) * Self.baseRowHeight)
        let metresPerDegree = Self.metresPerDegree * cos(latitude * .pi / 180)
        let columns = (360 * metresPerDegree / Self.baseMeters).rounded(.down)
        let base = columns.isFinite && columns >= 1 ? Int(columns) : 1
        return base * subdivision
    }

    func columnWidth(row: Int) -> Double { 360 / Double(columnCount(row: row)) }

    func rowCentre(_ row: Int) -> Double { min(90, -90 + (Double(row) + 0.5) * rowHeight) }

    public func cell(latitude: Double, longitude: Double) -> Cell {
        let row = min(rowCount - 1, max(0, Int(((latitude + 90) / rowHeight).rounded(.down))))
        let east = Self.degreesEast(longitude)
        let columns = columnCount(row: row)
        let column = min(columns - 1, max(0, Int((east / columnWidth(row: row)).rounded(.down))))
        return Cell(row: row, column: column)
    }

    /// The cell of the position, or `previous` while the position is within `margin` cells
    /// of it (half a cell, or more for a noisy receiver: at most one).
    public func cell(latitude: Double, longitude: Double, keeping previous: Cell?, margin: Double = 0.25) -> Cell {
        let found = cell(latitude: latitude, longitude: longitude)
        guard let previous, previous != found, previous.row < rowCount else { return found }
        let south = -90 + Double(previous.row) * rowHeight
        guard latitude >= south - margin * rowHeight, latitude <= south + (1 + margin) * rowHeight else { return found }
        let width = columnWidth(row: previous.row)
        let west = Double(previous.column) * width
        // Degrees east of the cell's west edge, taken the short way round the globe.
        var offset = (Self.degreesEast(longitude) - west).truncatingRemainder(dividingBy: 360)
        if offset < -180 { offset += 360 } else if offset >= 180 { offset -= 360 }
        guard offset >= -margin * width, offset <= (1 + margin) * width else { return found }
        return previous
    }

    /// Two cells or more apart (rows, or columns measured at the first cell's row width).
    func isFar(_ cell: Cell, from other: Cell) -> Bool {
        if abs(cell.row - other.row) >= 2 { return true }
        let a = centre(of: cell).longitude, b = centre(of: other).longitude
        var difference = abs(a - b).truncatingRemainder(dividingBy: 360)
        if difference > 180 { difference = 360 - difference }
        return difference >= 1.5 * columnWidth(row: other.row)
    }

    public func centre(of cell: Cell) -> (latitude: Double, longitude: Double) {
        let width = columnWidth(row: cell.row)
        var longitude = (Double(cell.column) + 0.5) * width - 180
        if longitude >= 180 { longitude -= 360 }
        return (rowCentre(cell.row), longitude)
    }

    /// Longitude as degrees east of the antimeridian, in [0, 360).
    static func degreesEast(_ longitude: Double) -> Double {
        let east = (longitude + 180).truncatingRemainder(dividingBy: 360)
        return east < 0 ? east + 360 : east
    }
}
