import Testing
import Foundation
import DevAccessCore

/// What a location grant below exact lets a program learn: never more than the level's cell.
struct LocationBlurTests {
    /// Great-circle distance in metres (haversine, mean Earth radius).
    static func metres(_ a: (Double, Double), _ b: (Double, Double)) -> Double {
        let radians = Double.pi / 180
        let dLat = (b.0 - a.0) * radians, dLon = (b.1 - a.1) * radians
        let h = pow(sin(dLat / 2), 2) + cos(a.0 * radians) * cos(b.0 * radians) * pow(sin(dLon / 2), 2)
        return 2 * 6_371_008.8 * asin(min(1, sqrt(h)))
    }

    /// A fixed-seed generator: the same points every run, so a failure can be replayed.
    struct SplitMix: RandomNumberGenerator {
        var state: UInt64
        mutating func next() -> UInt64 {
            state &+= 0x9E37_79B9_7F4A_7C15
            var z = state
            z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
            z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
            return z ^ (z >> 31)
        }
    }

    static let coarse = LocationAccuracy.allCases.filter { $0 != .exact }

    @Test(arguments: coarse)
    func servedPositionsAreWithinTheLevelOfTheTruth(level: LocationAccuracy) throws {
        let cell = try #require(level.cellMeters)
        var random = SplitMix(state: 12)
        var worst = 0.0
        for _ in 0..<5_000 {
            let truth = (Double.random(in: -80...80, using: &random), Double.random(in: -180..<180, using: &random))
            var blur = LocationBlur()
            let served = blur.serve(LocationFix(mode: 3, latitude: truth.0, longitude: truth.1), at: level)
            let position = (try #require(served.latitude), try #require(served.longitude))
            worst = max(worst, Self.metres(truth, position))
            #expect(served.accuracy == level)
            #expect(served.horizontalError == cell)
        }
        // A cell's half diagonal is about 0.71 of its side; columns are up to twice as wide
        // only where a whole row holds a single cell (near the poles at country level).
        #expect(worst <= cell, "worst \(worst) m for a \(cell) m cell")
        #expect(worst > cell / 4, "coordinates were hardly moved: worst \(worst) m for a \(cell) m cell")
    }

    @Test(arguments: coarse)
    func averagingManyNoisyReadsGetsNoCloserThanTheCell(level: LocationAccuracy) throws {
        let cell = try #require(level.cellMeters)
        var random = SplitMix(state: 99)
        var blur = LocationBlur()
        // A truth right on a cell edge is the worst case: without hysteresis, receiver noise
        // would split the reads between two cells in proportion to where the truth lies.
        let grid = LocationGrid(cellMeters: cell)
        let home = grid.centre(of: grid.cell(latitude: 48.1173, longitude: 11.5167))
        let edgeLatitude = home.latitude + cell / 111_320 / 2
        var positions: Set<String> = []
        var sum = (0.0, 0.0)
        for _ in 0..<1_000 {
            let noise = 5.0 / 111_320  // about 5 m
            let truth = (edgeLatitude + Double.random(in: -noise...noise, using: &random),
                         home.longitude + Double.random(in: -noise...noise, using: &random))
            let served = blur.serve(LocationFix(mode: 3, latitude: truth.0, longitude: truth.1), at: level)
            let position = (try #require(served.latitude), try #require(served.longitude))
            positions.insert("\(position.0),\(position.1)")
            sum = (sum.0 + position.0, sum.1 + position.1)
        }
        #expect(positions.count == 1, "reads around one spot were served as \(positions.count) positions")
        let average = (sum.0 / 1_000, sum.1 / 1_000)
        // Half a cell from the truth (less 1 %: the grid takes a degree as 111.32 km, the
        // haversine as 111.19 km).
        #expect(Self.metres(average, (edgeLatitude, home.longitude)) >= cell / 2 * 0.99)
    }

    @Test func movingAwayChangesTheCell() throws {
        var blur = LocationBlur()
        let first = blur.serve(LocationFix(mode: 3, latitude: 48.1173, longitude: 11.5167), at: .city)
        // 1.5 cells (15 km) north: beyond the quarter-cell margin.
        let moved = blur.serve(LocationFix(mode: 3, latitude: 48.1173 + 15_000 / 111_320, longitude: 11.5167),
                               at: .city)
        #expect(try #require(moved.latitude) > (try #require(first.latitude)))
    }

    @Test func exactIsExact() {
        let fix = LocationFix(device: "/dev/ttyACM0", mode: 3, time: "2026-11-30T12:00:00.000Z", latitude: 48.1173,
                              longitude: 11.516666667, altitude: 545.4, speed: 1.2, track: 84.4, climb: 0.1,
                              horizontalError: 3.1, verticalError: 5.2)
        var blur = LocationBlur()
        #expect(blur.serve(fix, at: .exact) == fix)
    }

    @Test func fieldsThatWouldLeakMoreAreWithheldOrRounded() {
        let fix = LocationFix(device: "/dev/ttyACM0", mode: 3, time: "2026-11-30T12:00:00.000Z", latitude: 48.1173,
                              longitude: 11.516666667, altitude: 545.4, speed: 1.2, track: 84.4, climb: 0.1,
                              horizontalError: 3.1, verticalError: 5.2)
        var blur = LocationBlur()
        for level in Self.coarse {
            let served = blur.serve(fix, at: level)
            #expect(served.speed == nil && served.track == nil && served.climb == nil)
            // A rounded altitude would flip with noise at a rounding edge: none below exact.
            #expect(served.altitude == nil && served.verticalError == nil && served.mode == 2)
            #expect(served.device == fix.device && served.time == fix.time)
        }
        let city = blur.serve(fix, at: .city)
        // A coarser fix cannot be made finer again.
        #expect(blur.serve(city, at: .street) == city)
    }

    @Test func aFixWithoutPositionStaysWithout() {
        var blur = LocationBlur()
        let served = blur.serve(LocationFix(device: "/dev/ttyUSB0", mode: 1), at: .city)
        #expect(served.mode == 1 && served.latitude == nil && served.longitude == nil && served.accuracy == .city)
    }

    @Test(arguments: [(90.0, 0.0), (-90.0, 0.0), (0.0, 180.0), (0.0, -180.0), (12.5, 179.99999), (-33.9, -179.99999),
                      (89.9999, 123.4), (0.0, 540.0)])
    func theGridCoversTheGlobe(latitude: Double, longitude: Double) throws {
        for level in Self.coarse {
            let cell = try #require(level.cellMeters)
            let grid = LocationGrid(cellMeters: cell)
            let centre = grid.centre(of: grid.cell(latitude: latitude, longitude: longitude))
            #expect((-90...90).contains(centre.latitude))
            #expect((-180..<180).contains(centre.longitude))
            let wrapped = ((longitude + 180).truncatingRemainder(dividingBy: 360)) - 180
            if abs(latitude) < 80 {
                #expect(Self.metres((latitude, wrapped), centre) <= cell)
            }
        }
    }

    @Test func levelsParseAndOrder() throws {
        #expect(try LocationAccuracy.parse("City") == .city)
        #expect(LocationAccuracy.country < .city && .street < .exact)
        #expect(min(LocationAccuracy.exact, .neighborhood) == .neighborhood)
        #expect(throws: LocationAccuracy.ParseError.self) { try LocationAccuracy.parse("precise") }
        let error = try #require(throws: LocationAccuracy.ParseError.self) { try LocationAccuracy.parse("x") }
        #expect(error.description.contains("exact, street, neighborhood, city, country"))
    }
}

extension LocationBlurTests {
    /// The grids are nested: a coarser answer says nothing the finer one does not, so a
    /// program granted a level learns nothing more by also asking coarser ones. For every
    /// point, the finer cell lies inside the coarser cell the point is in.
    @Test func theLevelsGridsAreNested() throws {
        var random = SplitMix(state: 7)
        let levels = Self.coarse
        for _ in 0..<5_000 {
            let latitude = Double.random(in: -89.9...89.9, using: &random)
            let longitude = Double.random(in: -180..<180, using: &random)
            for (index, coarse) in levels.enumerated() {
                for fine in levels[(index + 1)...] {
                    let coarseGrid = LocationGrid(cellMeters: try #require(coarse.cellMeters))
                    let fineGrid = LocationGrid(cellMeters: try #require(fine.cellMeters))
                    let fineCentre = fineGrid.centre(of: fineGrid.cell(latitude: latitude, longitude: longitude))
                    #expect(coarseGrid.cell(latitude: fineCentre.latitude, longitude: fineCentre.longitude)
                                == coarseGrid.cell(latitude: latitude, longitude: longitude),
                            "\(latitude), \(longitude): the \(fine) cell is not inside the \(coarse) cell")
                }
            }
        }
    }
}

extension LocationBlurTests {
    /// A receiver standing still between buildings wanders ±45 m and says so (eph 40 m): at
    /// street level (100 m cells) it must not flip between cells in proportions that place
    /// the edge.
    @Test func aNoisyReceiverIsNotFlippedAcrossAStreetCellEdge() throws {
        let grid = LocationGrid(cellMeters: 100)
        let home = grid.centre(of: grid.cell(latitude: 48.1173, longitude: 11.5167))
        let edge = home.latitude + 100.0 / 111_320 / 2 + 5.0 / 111_320  // 5 m past the row edge
        var random = SplitMix(state: 3)
        var blur = LocationBlur()
        var served: Set<String> = []
        var wander = 0.0
        for _ in 0..<2_000 {
            // A slow random walk within ±45 m.
            wander = max(-45, min(45, wander + Double.random(in: -6...6, using: &random)))
            let fix = LocationFix(mode: 3, latitude: edge + wander / 111_320, longitude: home.longitude,
                                  horizontalError: 40)
            let out = blur.serve(fix, at: .street)
            served.insert("\(out.latitude ?? 0),\(out.longitude ?? 0)")
        }
        #expect(served.count == 1, "served \(served.count) positions")
    }
}

extension LocationBlurTests {
    /// A real move to the next cell is served, after the position has stayed there for
    /// `fixesToMove` fixes; a jump of two cells or more at once.
    @Test func aMoveToTheNextCellIsServedAfterItHolds() throws {
        let grid = LocationGrid(cellMeters: 100)
        let home = grid.centre(of: grid.cell(latitude: 48.1173, longitude: 11.5167))
        // 120 m north: past the next cell's centre, beyond the half-cell margin.
        let next = (latitude: home.latitude + 120.0 / 111_320, longitude: home.longitude)
        var blur = LocationBlur()
        let first = blur.serve(LocationFix(mode: 3, latitude: home.latitude, longitude: home.longitude), at: .street)
        var served: [Double] = []
        for _ in 0..<LocationBlur.fixesToMove {
            served.append(blur.serve(LocationFix(mode: 3, latitude: next.latitude, longitude: next.longitude),
                                     at: .street).latitude ?? 0)
        }
        #expect(served.dropLast().allSatisfy { $0 == first.latitude }, "\(served)")
        #expect(try #require(served.last) > (try #require(first.latitude)))
        let far = blur.serve(LocationFix(mode: 3, latitude: home.latitude + 500.0 / 111_320,
                                         longitude: home.longitude), at: .street)
        #expect(try #require(far.latitude) > (try #require(served.last)) + 300.0 / 111_320)
    }
}

extension LocationBlurTests {
    /// Reading one fix many times (every client, every POLL) does not hurry a move: only a
    /// new fix counts towards the fixes a move needs.
    @Test func askingOftenDoesNotHurryAMove() throws {
        let grid = LocationGrid(cellMeters: 100)
        let home = grid.centre(of: grid.cell(latitude: 48.1173, longitude: 11.5167))
        var blur = LocationBlur()
        let first = blur.serve(LocationFix(mode: 3, time: "t0", latitude: home.latitude, longitude: home.longitude),
                               at: .street)
        let away = LocationFix(mode: 3, time: "t1", latitude: home.latitude + 120.0 / 111_320, longitude: home.longitude)
        for _ in 0..<50 {
            #expect(blur.serve(away, at: .street).latitude == first.latitude)
        }
    }
}
